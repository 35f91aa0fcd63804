//! Flux source proof: ask a Flux source (`OCIRepository`, `HelmRepository`) to reconcile with a
//! fresh `reconcile.fluxcd.io/requestedAt` nonce and wait until it acknowledges that nonce with
//! `Ready=True` — proof that Flux itself can pull with the reasserted credential.

use std::time::Duration;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch};
use serde_json::{Value, json};
use tracing::debug;

use crate::error::GhcrError;
use crate::reassert::WriteGate;

/// The annotation that requests a reconcile; its value is the nonce.
pub const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

/// How often a reconcile request is re-read and retried after the object moved (status writes
/// by the controller move resourceVersion); each try is a CAS on a fresh read.
pub const MAX_REQUEST_ATTEMPTS: usize = 5;

/// A Flux source object.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SourceRef {
    /// Its API resource.
    pub resource: ApiResource,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl SourceRef {
    /// An `OCIRepository` (`source.toolkit.fluxcd.io/v1`).
    #[must_use]
    pub fn oci_repository(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        let gvk = GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", "OCIRepository");
        Self {
            resource: ApiResource::from_gvk_with_plural(&gvk, "ocirepositories"),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A `HelmRepository` (`source.toolkit.fluxcd.io/v1`).
    #[must_use]
    pub fn helm_repository(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        let gvk = GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", "HelmRepository");
        Self {
            resource: ApiResource::from_gvk_with_plural(&gvk, "helmrepositories"),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn api(&self, client: Client) -> Api<DynamicObject> {
        Api::namespaced_with(client, &self.namespace, &self.resource)
    }

    fn describe(&self) -> String {
        format!("{} {}/{}", self.resource.kind, self.namespace, self.name)
    }
}

/// What a source's status says about one nonce (pure judgement).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SourceVerdict {
    /// The nonce is not acknowledged yet, or Ready is not final for this generation.
    Pending,
    /// Acknowledged with `Ready=True`.
    Ready {
        /// `status.artifact.revision`, if present.
        revision: Option<String>,
    },
    /// Acknowledged with `Ready=False`; `reason` is the condition's reason (a fixed Flux word
    /// such as `AuthenticationFailed`), never its message.
    Failed {
        /// The reason.
        reason: String,
    },
    /// `spec.suspend` is true: the source acknowledges requests without pulling, so its `Ready`
    /// proves nothing about the credential.
    Suspended,
}

/// Judges `obj` for `nonce` (pure): acknowledged means `status.lastHandledReconcileAt == nonce`;
/// then the `Ready` condition decides, provided it is not older than the current generation.
#[must_use]
pub fn judge_source(obj: &DynamicObject, nonce: &str) -> SourceVerdict {
    if obj.data.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true) {
        return SourceVerdict::Suspended;
    }
    let status = obj.data.get("status");
    let acknowledged = status
        .and_then(|s| s.get("lastHandledReconcileAt"))
        .and_then(Value::as_str)
        == Some(nonce);
    if !acknowledged {
        return SourceVerdict::Pending;
    }
    let Some(ready) = status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        })
    else {
        return SourceVerdict::Pending;
    };
    let generation = obj.metadata.generation.unwrap_or(0);
    if ready
        .get("observedGeneration")
        .and_then(Value::as_i64)
        .is_some_and(|g| g < generation)
    {
        return SourceVerdict::Pending;
    }
    match ready.get("status").and_then(Value::as_str) {
        Some("True") => SourceVerdict::Ready {
            revision: status
                .and_then(|s| s.pointer("/artifact/revision"))
                .and_then(Value::as_str)
                .map(str::to_string),
        },
        Some("False") => SourceVerdict::Failed {
            reason: ready.get("reason").and_then(Value::as_str).map_or_else(
                || "<none>".to_string(),
                |r| {
                    let plain = !r.is_empty()
                        && r.len() <= 64
                        && r.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                    if plain {
                        r.to_string()
                    } else {
                        "<not shown>".to_string()
                    }
                },
            ),
        },
        _ => SourceVerdict::Pending,
    }
}

/// The CAS patch that requests a reconcile with `nonce` on the object as read (pure): `test`
/// uid and resourceVersion, create the annotations map if absent, set the annotation.
#[must_use]
pub fn request_patch(obj: &DynamicObject, nonce: &str) -> json_patch::Patch {
    annotation_patch(obj, "reconcile.fluxcd.io~1requestedAt", nonce)
}

/// The CAS patch that sets one annotation on the object as read (pure): `test` uid and
/// resourceVersion, create the annotations map if absent, set `key` (already escaped as a JSON
/// Pointer token) to `value`. Shared by the reconcile request and ESO's force-sync.
pub(crate) fn annotation_patch(obj: &DynamicObject, key: &str, value: &str) -> json_patch::Patch {
    let mut ops = vec![
        json!({ "op": "test", "path": "/metadata/uid", "value": obj.metadata.uid }),
        json!({
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": obj.metadata.resource_version,
        }),
    ];
    if obj.metadata.annotations.is_none() {
        ops.push(json!({ "op": "add", "path": "/metadata/annotations", "value": {} }));
    }
    ops.push(json!({
        "op": "add",
        "path": format!("/metadata/annotations/{key}"),
        "value": value,
    }));
    serde_json::from_value(Value::Array(ops))
        .expect("an annotation patch is a well-formed JSON Patch")
}

/// The result of asking for a reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a reconcile request that was not made is a value"]
#[non_exhaustive]
pub enum RequestOutcome {
    /// The annotation holds the nonce.
    Requested {
        /// resourceVersion after the write.
        resource_version: String,
    },
    /// The object kept moving under every attempt; nothing was overwritten.
    Moved,
    /// The object does not exist.
    NotFound,
    /// Our identity may not read or patch it.
    Forbidden,
}

/// How waiting for a source ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a source that did not pull is a value: check it"]
#[non_exhaustive]
pub enum SourceProof {
    /// Flux pulled with the credential.
    Ready {
        /// The artifact revision.
        revision: Option<String>,
    },
    /// Flux tried and failed (the condition reason only).
    Failed {
        /// The reason.
        reason: String,
    },
    /// The request itself did not land.
    NotRequested(RequestOutcome),
    /// The source is suspended, so it cannot prove the credential.
    Suspended,
    /// Not acknowledged within the caller's deadline.
    TimedOut,
}

/// A fresh nonce for `requestedAt`.
#[must_use]
pub fn new_nonce() -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let suffix: String = (0..12)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect();
    format!("ghcr-auth-{suffix}")
}

/// Sets `requestedAt = nonce` on the source by a CAS patch on a fresh read, re-reading and
/// trying again (at most [`MAX_REQUEST_ATTEMPTS`]) when the object moved in between. `gate`
/// (the handoff Lease, e.g. [`crate::reassert::Reasserter::gate`]) runs before every patch.
///
/// # Errors
/// [`GhcrError::SourceGate`] when the gate refuses (nothing is written);
/// [`GhcrError::Kube`] for API failures other than 403/404/409/422.
pub async fn request_reconcile(
    client: &Client,
    source: &SourceRef,
    nonce: &str,
    gate: &dyn WriteGate,
) -> Result<RequestOutcome, GhcrError> {
    let api = source.api(client.clone());
    for _ in 0..MAX_REQUEST_ATTEMPTS {
        let obj = match api.get_opt(&source.name).await {
            Ok(Some(o)) => o,
            Ok(None) => return Ok(RequestOutcome::NotFound),
            Err(kube::Error::Api(s)) if s.code == 403 => return Ok(RequestOutcome::Forbidden),
            Err(e) => return Err(kube_err("reading", source, e)),
        };
        let patch = Patch::Json::<()>(request_patch(&obj, nonce));
        gate.check()
            .await
            .map_err(|source_err| GhcrError::SourceGate {
                what: source.describe(),
                source: source_err,
            })?;
        match api
            .patch(&source.name, &flux_fence::api::patch_params(), &patch)
            .await
        {
            Ok(o) => {
                return Ok(RequestOutcome::Requested {
                    resource_version: o.metadata.resource_version.unwrap_or_default(),
                });
            }
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
                debug!(source = %source.describe(), "source moved; re-reading");
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(RequestOutcome::NotFound),
            Err(kube::Error::Api(s)) if s.code == 403 => return Ok(RequestOutcome::Forbidden),
            Err(e) => return Err(kube_err("patching", source, e)),
        }
    }
    Ok(RequestOutcome::Moved)
}

/// Polls the source every `poll` until [`judge_source`] is final for `nonce` or `deadline`
/// has passed.
///
/// # Errors
/// [`GhcrError::Kube`] when a read fails for another reason than 404.
pub async fn await_source(
    client: &Client,
    source: &SourceRef,
    nonce: &str,
    deadline: Duration,
    poll: Duration,
) -> Result<SourceProof, GhcrError> {
    let api = source.api(client.clone());
    let until = tokio::time::Instant::now() + deadline;
    loop {
        let obj = api
            .get_opt(&source.name)
            .await
            .map_err(|e| kube_err("reading", source, e))?;
        match obj.as_ref().map(|o| judge_source(o, nonce)) {
            Some(SourceVerdict::Ready { revision }) => return Ok(SourceProof::Ready { revision }),
            Some(SourceVerdict::Failed { reason }) => return Ok(SourceProof::Failed { reason }),
            Some(SourceVerdict::Suspended) => return Ok(SourceProof::Suspended),
            None => return Ok(SourceProof::NotRequested(RequestOutcome::NotFound)),
            Some(SourceVerdict::Pending) => {}
        }
        if tokio::time::Instant::now() + poll > until {
            return Ok(SourceProof::TimedOut);
        }
        tokio::time::sleep(poll).await;
    }
}

/// Requests a reconcile with a fresh nonce and waits for the verdict.
///
/// # Guarantees
/// `Ready` is returned only when the source acknowledged *this* request's nonce with
/// `Ready=True`, so it reflects a pull that started after the request (and therefore after any
/// Secret written before the call).
///
/// # Errors
/// As [`request_reconcile`] and [`await_source`].
///
/// # Caveats
/// A suspended source acknowledges nonces without pulling: it is reported as
/// [`SourceProof::Suspended`], never as `Ready`. The caller owns the deadline.
pub async fn prove_source(
    client: &Client,
    source: &SourceRef,
    gate: &dyn WriteGate,
    deadline: Duration,
    poll: Duration,
) -> Result<SourceProof, GhcrError> {
    let nonce = new_nonce();
    match request_reconcile(client, source, &nonce, gate).await? {
        RequestOutcome::Requested { .. } => {
            await_source(client, source, &nonce, deadline, poll).await
        }
        other => Ok(SourceProof::NotRequested(other)),
    }
}

fn kube_err(verb: &'static str, source: &SourceRef, e: kube::Error) -> GhcrError {
    GhcrError::Kube {
        verb,
        what: source.describe(),
        source: e,
    }
}
